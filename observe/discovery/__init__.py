"""Discovery: the instances of an attached deployment's groups that name a source instead of
a list (controller/spec/attach.py `Discovery`), looked up again every `every_s` seconds.
`members` is the pure part (who is in, under which stable name, which events); `follower`
asks the sources, bounded in time and size, without ever holding up a tick."""
