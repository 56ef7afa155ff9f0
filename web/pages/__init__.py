"""The HTML pages: the home and deployment pages, their actions, forms, bench, TTFT and login
pages."""
