"""Hidden tests for t1_fix_pagination: has_next is exact for every size, via the API too."""

from taskapp.utils.pagination import paginate


def test_exact_multiple_last_page():
    page = paginate(list(range(40)), page=2, page_size=20)
    assert page.items == list(range(20, 40))
    assert page.has_next is False


def test_has_next_matches_remaining_items():
    for total in range(0, 31):
        items = list(range(total))
        for size in range(1, 8):
            for number in range(1, total // size + 3):
                page = paginate(items, page=number, page_size=size)
                assert page.items == items[(number - 1) * size : number * size]
                assert page.has_next is (number * size < total), (total, size, number)


def test_api_last_page_has_no_next(app_client):
    assert app_client.get("/tasks", page=2, page_size=15).json["has_next"] is True
    last = app_client.get("/tasks", page=3, page_size=15).json
    assert len(last["items"]) == 15
    assert last["has_next"] is False


def test_project_tasks_last_page_has_no_next(app_client):
    first = app_client.get("/projects/1/tasks", page=1, page_size=10).json
    assert first["has_next"] is True
    last = app_client.get("/projects/1/tasks", page=3, page_size=10).json
    assert [t["project_id"] for t in last["items"]] == [1] * 10
    assert last["has_next"] is False
