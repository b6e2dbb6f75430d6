"""``make sam-local``: the real SAM CLI against template.yaml, on Docker.

``sam build``, then ``sam local invoke`` of every function with its events/
file and ``sam local start-api``, each answer and its effect in Redis, MySQL
and SQS checked, against the local Redis, MariaDB and a moto server; then
``seckill-flash-sale --endpoint`` against that start-api, with tokens from
``sam local start-lambda``. What the
run needs (Docker, the Lambda base image, relays to the local services) it
sets up, and it leaves nothing running. ``python -m scripts.sam_local --help``.
"""
