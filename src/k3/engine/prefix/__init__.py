"""The prefix cache: which earlier prompts' state a new request may resume from (an index of MLA blocks
by token prefix), the KDA snapshots that make it exact, their byte budget and their disk tier."""
