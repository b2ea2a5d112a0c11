"""Agent assembly: the capabilities list, instructions, permissions and history custody."""
