"""What several test modules share: running the CLI as users do, small runs and stores, fake
suites. A test module imports helpers from here (or conftest), never from another test module."""
