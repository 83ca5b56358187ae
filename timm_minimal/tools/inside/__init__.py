"""Looking inside the models: attention maps on the command line and in the browser app."""
