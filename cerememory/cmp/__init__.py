"""CMP, the Cerememory Protocol: messages, errors and the one dispatcher."""
