"""The main job (``seckill-flash-sale``): a whole flash sale run on the local stand-in
(``seckill_local``), with its report, and a chaos run that injects every fault."""
