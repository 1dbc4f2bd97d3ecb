"""The Connect wire, sans-IO: envelopes and end-streams, the typed errors that end a call, and a
lossless protobuf field walker. Shared by the agent engine, the one-shot services and the addons."""
