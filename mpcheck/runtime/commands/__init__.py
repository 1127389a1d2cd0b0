"""The two command lines, `mpcheck run` and `mpcheck dryrun`, and what they share."""
