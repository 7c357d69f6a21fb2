"""msgspec types: slim views of Kubernetes objects, the source envelope, the output records."""
