"""The arq worker and libflow's job functions; nothing else (the logic lives in libflow/)."""
