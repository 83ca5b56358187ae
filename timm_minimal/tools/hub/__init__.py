"""Publishing a training run to the Hugging Face Hub: the repository folder, its model card, the upload."""
