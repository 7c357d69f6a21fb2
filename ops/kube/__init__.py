"""A local Kubernetes API server (etcd + kube-apiserver) for development and the tests: run as a script or imported."""
