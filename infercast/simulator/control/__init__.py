"""The product's actuator driven on the twin: the control arms (`arms`, `driver`), hindsight's plans and their
search (`plans`, `forks`, `levers`).  The twin's side of the actuator's calls is `twin.admin`."""
