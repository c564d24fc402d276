"""Series from real traces and twin runs: the trace loaders (`traces`), the forecasters' backtest (`evaluate`,
`backtest_cli`), the LSTM's training data and command (`pretrain_data`, `train_cli`), the harm replay
(`harm_replay`) and the fleet sized for a trace (`sizing`)."""
