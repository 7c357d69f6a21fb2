"""What runs faultline and its tests locally and in a cluster; the Python modules here also run as scripts."""
