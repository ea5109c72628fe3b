"""Side area: rendering a validated plan for Kubernetes and systemd."""
