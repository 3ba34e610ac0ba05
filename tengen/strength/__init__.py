"""The loop's strength against GNU Go: one measurement of a version, and the service that measures
each new version while the loop runs."""
