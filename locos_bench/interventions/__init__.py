"""Head interventions: what a run does to chosen heads."""
