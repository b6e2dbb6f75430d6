"""The request path: a press at the gate (``lua/gate.lua``), then the order it places or refuses."""
