"""What a person reads: terminal summary, HTML report, compare, the CI gate."""
