"""The MoRIIO registry of a real proxy: who may register, and what it does with hostile senders."""
