"""What a run leaves and reads back: its folder and lock, run.json's typed record, the atomic checkpoints, full
disks, what a launch writes about itself, and resuming."""
