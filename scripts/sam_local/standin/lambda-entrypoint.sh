#!/bin/sh
# The image's entrypoint, as in AWS's images: `docker run -p 9000:8080 IMAGE app.lambda_handler`
# serves the handler through the runtime interface emulator; SAM replaces it with its own.
export _HANDLER="${1:-$_HANDLER}"
if [ -z "${AWS_LAMBDA_RUNTIME_API:-}" ]; then
  exec /usr/local/bin/aws-lambda-rie /var/runtime/bootstrap
fi
exec /var/runtime/bootstrap
