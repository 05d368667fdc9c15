"""The tensor engine RTL: the systolic array of processing elements and its sequencer."""
