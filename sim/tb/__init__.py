"""The RTL testbenches: cocotb benches, the simulator runner and their pytest entry points."""
