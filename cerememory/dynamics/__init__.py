"""Living memory: rendering by fidelity, decay, activation, consolidation, dreams."""
