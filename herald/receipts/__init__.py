"""The receipt server: provider status callbacks, stored first, then signalled to their workflows."""
