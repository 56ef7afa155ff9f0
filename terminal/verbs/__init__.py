"""The operator verbs (`pdctl ls|show|apply|start|stop|switch|move|events|logs|advise`), each a
client of the REST API."""
