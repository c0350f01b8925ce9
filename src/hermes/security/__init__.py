"""Who a caller is (authentication) and what it may do (authorization), shared by the HTTP APIs: users and
their roles and owner ids, password hashes, bearer tokens, and the brake on repeated failed logins."""
