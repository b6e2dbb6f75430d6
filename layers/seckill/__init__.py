"""Seckill: the shared core of the flash-sale service, shipped as a Lambda layer.

Business rules live here as plain functions and classes; the handlers under
``functions/`` only wire them to AWS events.
"""
