"""The API's endpoints, one router per topic."""
