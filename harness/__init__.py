"""Real pdctl processes on loopback, as the tests and the benchmarks both drive them: start on
free ports, wait until they answer, call them, stop them and whatever they started."""
