"""Message senders, one module per protocol or delivery style."""
