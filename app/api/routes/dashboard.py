"""GET /: the dashboard page (Jinja2, no CDN: everything it needs is served from here)."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from app.api.deps import SettingsDep
from app.api.security import HTML_SECURITY_HEADERS
from app.core.batch import AGGREGATE_LABELS
from app.core.schemes import SCHEMES

router = APIRouter(tags=["dashboard"])
templates = Jinja2Templates(directory=str(Path(__file__).resolve().parents[2] / "templates"))


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
async def dashboard(request: Request, settings: SettingsDep) -> HTMLResponse:
    return templates.TemplateResponse(request, "dashboard.html", {"instance": settings.instance,
                                                                  "scheme_order": SCHEME_ORDER},
                                      headers=HTML_SECURITY_HEADERS)


#: What the page's chart colours are fixed by: every scheme id in registry order, then the BLS
#: aggregate labels (the throughput series the stats record).
SCHEME_ORDER = [*SCHEMES, *AGGREGATE_LABELS.values()]
