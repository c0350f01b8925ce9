"""Large messages beside Kafka (the offload protocol of hop-client): a blob store, the ``/offload`` HTTP service,
and the ``sys.metadata`` discovery document that tells Kafka clients where the service is."""

# The offload service's routes on the publishing port start with this.
OFFLOAD_PREFIX = "/offload/"
