"""The offline preview: the Pulumi program under the SDK's mock engine, rendered and checked."""
