"""The vector and scalar (activation) engines' RTL, and the activation functions' fits."""
