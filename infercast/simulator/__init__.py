"""The simulator: everything that exists to try infercast without a GPU fleet, and nothing a real fleet runs.

- `twin`: the fleet twin (engines, KV caches, the router, traffic, its admin API and its exporter source);
  `twin_cli`: its command (`infercast twin`), which runs it under an arm of `control` or on a trace of `replay`.
- `control`: the product's actuator driven on the twin: the control arms the demo and benches compare, hindsight's
  plans and their search, and the twin's actuator backend.
- `replay`: real traces and twin runs turned into series: the trace loaders, the forecasters' backtest and the
  LSTM's training data, the harm replay and the fleet sizing for a trace.
- `demo`: `infercast demo`, the flash sale replayed under every control, and its live mode.
- `lab`: `infercast lab`, real vLLM engines behind HAProxy with the whole stack.

The simulator imports the product (the folders exporters/, predictors/, alertrules/, dashboards/, actuators/) and
the foundation (the modules of `infercast` itself) through the interfaces a real fleet uses; nothing outside this
folder imports it, except the `infercast` command line (`infercast.tools`), which offers its commands.
`tests/test_layers.py` checks it.
"""
