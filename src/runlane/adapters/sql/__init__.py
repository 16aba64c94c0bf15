"""What the SQL store adapters share: the named-statement loader (`queries`), migrations,
row decoding (`rows`), the methods both stores write the same way (`base`), and the database
implementation of the Bus port (`bus`)."""
