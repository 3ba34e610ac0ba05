"""What ties the loop's stages together: the data dir's layout (layout) and the messages between
the services (messages)."""
