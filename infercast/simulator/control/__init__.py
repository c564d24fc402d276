"""The product's actuator driven on the twin: the control arms (`arms`, `driver`), hindsight's plans and their
search (`plans`, `forks`, `levers`), and the twin's actuator backend (`backend`)."""
