"""What pages and routes render from state: the common page context, the form's fields, the PD
banner, the trade panel, the live advice."""
