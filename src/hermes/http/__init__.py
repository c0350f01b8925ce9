"""HTTP plumbing shared by the frontend and management servers (aiohttp)."""
