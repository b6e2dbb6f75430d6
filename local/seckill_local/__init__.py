"""Docker-free local stand-in for ``sam local``: reads ``template.yaml`` to invoke
functions, serve the HTTP API with its authorizer, and feed OrderQueue to the
persister against a moto SQS server."""
