"""Host probes: typed parsers of host readings (`parsers`), their pure rules (`rules`) and the
sampler that reads them on every node around a benchmark arm (`sampler`)."""
