"""The persister: orders from the queue written to MySQL, poison isolated."""
