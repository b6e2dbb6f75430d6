import sys

from seckill_ops.capacity.cli import main

sys.exit(main())
