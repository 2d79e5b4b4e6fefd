/* viz_html.c -- index.html: an offline flipbook over the frame pictures.
 *
 * One self-contained file (inline CSS and script, no network, no build step):
 * the frame picture, a slider, play/pause and step buttons, keyboard arrows,
 * the numbers of the shown frame, and the timeline and plot with a cursor at
 * the shown frame (click either to jump). The per-frame numbers are embedded
 * as a JSON array. "#frame=N" in the URL opens frame N.
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "viz_draw.h"
#include "viz_render.h"

static const char html_head[] =
"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
"<title>hheap heap map</title>\n<style>\n"
"body{background:#101218;color:#e8eaee;font:14px/1.4 'DejaVu Sans',system-ui,sans-serif;margin:0;padding:18px 24px}\n"
"h1{font-size:20px;margin:0 0 2px}\n.sub{color:#8d96a8;margin-bottom:14px}\n"
".bar{display:flex;align-items:center;gap:10px;margin:10px 0;flex-wrap:wrap}\n"
"button{background:#222733;color:#e8eaee;border:1px solid #3a4150;border-radius:4px;padding:4px 12px;font:inherit;cursor:pointer}\n"
"button:hover{background:#2c3340}\ninput[type=range]{flex:1;min-width:240px;accent-color:#ffd166}\n"
"#cur{font-weight:bold;min-width:110px;display:inline-block}\n"
".wrap{position:relative;display:inline-block;max-width:100%}\n.wrap img{display:block;max-width:100%;height:auto}\n"
".cursor{position:absolute;top:0;height:0;width:2px;background:#ffd166;opacity:.85;pointer-events:none}\n"
".row{display:flex;flex-wrap:wrap;gap:8px 28px;align-items:flex-start}\n"
"table{border-collapse:collapse;margin:6px 0 16px}\ntd{padding:2px 14px 2px 0}\ntd.k{color:#8d96a8}\ntd.v{font-weight:bold;text-align:right}\n"
"h2{font-size:15px;margin:22px 0 6px}\n.clickable{cursor:crosshair}\n.note{color:#8d96a8;font-size:12px}\n"
"</style></head><body>\n";

static const char html_body[] =
"<h1>hheap heap map</h1><div class=\"sub\" id=\"label\"></div>\n"
"<div class=\"bar\"><button id=\"prev\" title=\"previous (left arrow)\">&#9664;</button>"
"<button id=\"play\" title=\"play / pause (space)\">play</button>"
"<button id=\"next\" title=\"next (right arrow)\">&#9654;</button>"
"<input type=\"range\" id=\"slider\" min=\"0\" value=\"0\"><span id=\"cur\"></span>"
"<label class=\"note\">speed <select id=\"speed\"><option value=\"200\">5/s</option><option value=\"83\" selected>12/s</option>"
"<option value=\"33\">30/s</option></select></label></div>\n"
"<div class=\"row\"><div class=\"wrap\"><img id=\"frame\" alt=\"heap map of the shown frame\"></div>\n"
"<table id=\"nums\"></table></div>\n"
"<h2>Heap over time</h2><div class=\"note\">Click to jump to a frame.</div>\n"
"<div class=\"wrap clickable\" id=\"tlwrap\"><img src=\"timeline.png\" alt=\"timeline\"><div class=\"cursor\" id=\"tlcur\"></div></div>\n"
"<h2>Per-frame metrics</h2>\n"
"<div class=\"wrap clickable\" id=\"plwrap\"><img src=\"plot.png\" alt=\"plot\"><div class=\"cursor\" id=\"plcur\"></div></div>\n";

/* Columns of D: frame, drawn, frag, frag_sq, holes, largest_hole, moves, bytes_moved, debt, used, defrag_ns */
static const char html_script[] =
"<script>\n"
"const shown=D.filter(r=>r[1]);\n"
"const $=id=>document.getElementById(id);\n"
"function kib(b){const u=['B','KiB','MiB','GiB'];let i=0;while(b>=1024&&i<3){b/=1024;i++;}return (i?b.toFixed(b<10?2:1):b)+' '+u[i];}\n"
"function pct(x){return (x*100).toFixed(1)+'%';}\n"
"let idx=0,timer=null;\n"
"$('label').textContent=(LABEL?LABEL+' \\u00b7 ':'')+D.length+' frames recorded, '+shown.length+' pictures';\n"
"$('slider').max=Math.max(0,shown.length-1);\n"
"function pad(n){return String(n).padStart(6,'0');}\n"
"function place(cur,wrap,A,i){const img=wrap.querySelector('img');const s=img.clientWidth/A[2];"
"const fi=D.indexOf(shown[i]);cur.style.left=((A[0]+(A[1]-A[0])*(fi+0.5)/D.length)*s-1)+'px';"
"cur.style.top=(A[3]*s)+'px';cur.style.height=((A[4]-A[3])*s)+'px';}\n"
"function show(i){if(!shown.length)return;idx=Math.max(0,Math.min(shown.length-1,i));const r=shown[idx];\n"
" const src='frames/frame_'+pad(r[0])+'.png';if($('frame').getAttribute('src')!==src)$('frame').setAttribute('src',src);\n"
" $('slider').value=idx;$('cur').textContent='frame '+r[0];\n"
" const rows=[['fragmentation (largest free)',pct(r[2])],['fragmentation (sum of squares)',pct(r[3])],['holes',r[4]],"
"['largest hole',kib(r[5])],['moves this frame',r[6]],['bytes moved this frame',kib(r[7])],['compaction debt',kib(r[8])],"
"['bytes in use',kib(r[9])],['defrag step',(r[10]/1e6).toFixed(3)+' ms']];\n"
" $('nums').innerHTML=rows.map(x=>'<tr><td class=\"k\">'+x[0]+'</td><td class=\"v\">'+x[1]+'</td></tr>').join('');\n"
" cursors();\n"
" document.body.dataset.frame=r[0];if(location.hash!=='#frame='+r[0])history.replaceState(null,'','#frame='+r[0]);}\n"
"function cursors(){if(!shown.length)return;place($('tlcur'),$('tlwrap'),TL,idx);place($('plcur'),$('plwrap'),PL,idx);}\n"
"function jump(wrap,A,ev){const img=wrap.querySelector('img');const s=img.clientWidth/A[2];const rect=img.getBoundingClientRect();"
"const x=(ev.clientX-rect.left)/s;const fi=Math.floor((x-A[0])/(A[1]-A[0])*D.length);const f=D[Math.max(0,Math.min(D.length-1,fi))][0];"
"let best=0;shown.forEach((r,k)=>{if(Math.abs(r[0]-f)<Math.abs(shown[best][0]-f))best=k;});stop();show(best);}\n"
"function stop(){if(timer){clearInterval(timer);timer=null;$('play').textContent='play';}}\n"
"function play(){if(timer){stop();return;}$('play').textContent='pause';"
"timer=setInterval(()=>{if(idx>=shown.length-1){stop();return;}show(idx+1);},+$('speed').value);}\n"
"$('prev').onclick=()=>{stop();show(idx-1);};$('next').onclick=()=>{stop();show(idx+1);};$('play').onclick=play;\n"
"$('speed').onchange=()=>{if(timer){stop();play();}};\n"
"$('slider').oninput=e=>{stop();show(+e.target.value);};\n"
"$('tlwrap').onclick=e=>jump($('tlwrap'),TL,e);$('plwrap').onclick=e=>jump($('plwrap'),PL,e);\n"
"document.addEventListener('keydown',e=>{if(e.key==='ArrowLeft'){stop();show(idx-1);}else if(e.key==='ArrowRight'){stop();show(idx+1);}"
"else if(e.key===' '){e.preventDefault();play();}});\n"
"window.addEventListener('resize',cursors);document.querySelectorAll('.wrap img').forEach(i=>i.addEventListener('load',cursors));\n"
"const m=/frame=(\\d+)/.exec(location.hash);let start=0;"
"if(m){const f=+m[1];shown.forEach((r,k)=>{if(r[0]<=f)start=k;});}\n"
"show(start);\n"
"</script>\n</body></html>\n";

/* Writes s as a JSON string literal (escaping quotes, backslashes, controls and '<'). */
static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; p && *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p < 0x20 || *p == '<') fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

int viz_write_html(const char *path, const viz_series *s, const unsigned char *drawn, const char *label,
                   const viz_axes *tl, const viz_axes *pl) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs(html_head, f);
    fputs(html_body, f);
    fputs("<script>\nconst LABEL=", f);
    json_str(f, label ? label : "");
    fprintf(f, ";\nconst TL=[%d,%d,%d,%d,%d,%d],PL=[%d,%d,%d,%d,%d,%d];\nconst D=[\n", tl->x0, tl->x1, tl->width, tl->y0,
            tl->y1, tl->height, pl->x0, pl->x1, pl->width, pl->y0, pl->y1, pl->height);
    for (size_t i = 0; i < s->count; i++) {
        fprintf(f, "[%llu,%d,%.4f,%.4f,%u,%llu,%u,%llu,%llu,%llu,%llu]%s\n", (unsigned long long)s->frame[i], drawn[i] ? 1 : 0,
                (double)s->frag[i], (double)s->frag_sq[i], (unsigned)s->holes[i], (unsigned long long)s->largest_hole[i],
                (unsigned)s->moves[i], (unsigned long long)s->bytes_moved[i], (unsigned long long)s->debt[i],
                (unsigned long long)s->used[i], (unsigned long long)s->defrag_ns[i], i + 1 < s->count ? "," : "");
    }
    fputs("];\n</script>\n", f);
    fputs(html_script, f);
    bool bad = ferror(f) != 0;
    return fclose(f) == 0 && !bad ? 0 : -1;
}
