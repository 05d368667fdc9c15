"""The NeuronCore RTL: the instruction set, SBUF and PSUM, sequencers, DMA and the engines."""
