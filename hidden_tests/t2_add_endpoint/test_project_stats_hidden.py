"""Hidden tests for t2_add_endpoint: the stats are computed from live data, not remembered."""


def _stats(client, project_id):
    response = client.get(f"/projects/{project_id}/stats")
    assert response.status == 200, response.json
    return response.json


def test_stats_follow_status_changes(app_client):
    before = _stats(app_client, 1)
    task = next(
        t for t in app_client.get("/projects/1/tasks", page_size=50).json["items"] if t["status"] == "todo"
    )
    assert app_client.patch(f"/tasks/{task['id']}", {"status": "done"}).status == 200
    after = _stats(app_client, 1)
    assert after["todo"] == before["todo"] - 1
    assert after["done"] == before["done"] + 1
    assert after["total"] == before["total"]


def test_stats_count_new_and_deleted_tasks(app_client):
    before = _stats(app_client, 2)
    created = app_client.post("/tasks", {"project_id": 2, "title": "Extra", "status": "doing"})
    assert created.status == 201
    assert _stats(app_client, 2)["doing"] == before["doing"] + 1
    assert app_client.delete(f"/tasks/{created.json['id']}", {"user_id": 1}).status == 204
    assert _stats(app_client, 2) == before


def test_stats_for_new_empty_project(app_client):
    project = app_client.post("/projects", {"name": "Fresh start", "owner_id": 2})
    assert project.status == 201
    assert _stats(app_client, project.json["id"]) == {
        "project_id": project.json["id"],
        "total": 0,
        "todo": 0,
        "doing": 0,
        "done": 0,
    }


def test_stats_unknown_project_is_404(app_client):
    response = app_client.get("/projects/12345/stats")
    assert response.status == 404
    assert response.json["error"]["code"] == "PROJECT_NOT_FOUND"
