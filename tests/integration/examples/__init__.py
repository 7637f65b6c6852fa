"""The example applications (Django, Flask, the streaming checkout) run as a user would."""
