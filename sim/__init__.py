"""Models that run: golden models, the NeuronCore simulator, system models and testbenches."""
