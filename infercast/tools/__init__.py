"""The commands that put the parts together: the `infercast` command line (`cli`), `infercast check` (`check`) and
the Kubernetes generator (`k8s`).  They import the product and the simulator; nothing imports them."""
