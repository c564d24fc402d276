"""`python -m infercast.simulator.replay.traces PATH [--start S] [--end S]`."""

from infercast.simulator.replay.traces import main

raise SystemExit(main())
