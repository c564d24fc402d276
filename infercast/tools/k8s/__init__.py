"""infercast on Kubernetes: the Kustomize tree under deploy/kubernetes/, generated from the same sources as the
docker-compose stack (the fleet file, `alertrules`, `dashboards`), and its validation against the schemas."""
