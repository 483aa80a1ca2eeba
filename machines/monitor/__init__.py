"""The monitor's table and what the checker explores it with: ``table`` (the lifecycle,
its guards and effects), ``inputs`` (its exploration), ``responses`` (receiver answers the
exploration draws), ``audit`` (its auditor page notes), ``mutants`` (its equivalent
mutants). The app that runs it is :mod:`lifecycles.monitor`."""
