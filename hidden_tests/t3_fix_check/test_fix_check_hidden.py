"""Hidden tests for t3_fix_check: the gate passes AND the behaviour it guards is intact."""

import pytest

from taskapp.errors import NotFoundError
from taskapp.services import user_service


def test_unknown_user_is_404_with_code(app_client):
    response = app_client.get("/users/404404")
    assert response.status == 404
    assert response.json["error"]["code"] == "USER_NOT_FOUND"


def test_service_raises_not_found(repo):
    with pytest.raises(NotFoundError) as info:
        user_service.get_user(repo, 404404)
    assert info.value.code == "USER_NOT_FOUND"


def test_delete_by_unknown_user_is_404(app_client):
    response = app_client.delete("/tasks/2", {"user_id": 404404})
    assert response.status == 404
    assert response.json["error"]["code"] == "USER_NOT_FOUND"


def test_description_at_limit_is_accepted(app_client):
    response = app_client.post("/tasks", {"project_id": 1, "title": "Edge", "description": "d" * 2000})
    assert response.status == 201
    assert len(response.json["description"]) == 2000


def test_description_over_limit_is_rejected(app_client):
    response = app_client.patch("/tasks/3", {"description": "d" * 2001})
    assert response.status == 422
    assert response.json["error"]["code"] == "DESCRIPTION_TOO_LONG"
